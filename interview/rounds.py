"""Mock rounds: the draw, the round's header, its source, and `make mock`.

The draw. Round N with k bugs, drawn from a catalog of `size` bugs, keeps the bugs
`draw(N, k, size) = random.Random(N).sample(BUG_IDS[:size], k)` of grpo_buggy.py and replaces every other
catalogued function by grpo_fixed.py's version of it (its `# FIX` comments stripped), at source level:
nothing else of grpo_fixed enters, so a round is a hand-out with fewer bugs. The file names neither the
bugs nor the draw; its one-line header gives the round number, the bug count, the catalog size and when it
was drawn, and the grader re-derives the draw from those. Only the first `size` bugs take part, so a bug
added to the catalog later regrades no old round; a header without the size (written before the header
carried it) means the first LEGACY_SIZE bugs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from interview import history
from interview.sandbox import CannotGrade
from interview.splice import first_docstring_lines, handout_with_fixed
from workbook import catalog

ROOT = catalog.ROOT
PRACTICE = history.PRACTICE
ROUND_MINUTES = 45
"""length of a mock round: the debugging part of the round as SPEC.md describes it"""
DEFAULT_BUGS = 3
"""bugs per mock round: "typically three", as SPEC.md describes the round"""
LEGACY_SIZE = 11
"""the catalog size of a header that does not state it"""

HEADER_START = "# GRPO practice round "
HEADER = HEADER_START + "{round}: {bugs} bug{s} of {size}, drawn {when} UTC. (check {check})"
HEADER_RE = re.compile(r"^# GRPO practice round (\d+): (\d+) bugs?(?: of (\d+))?, "
                       r"drawn (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\.(?: \(check ([0-9a-f]{8})\))?$")
"""a header without the size (and so without the check) was written before the header carried them: still
accepted, as the first LEGACY_SIZE bugs; a header with the size must carry its check"""
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def catalog_size() -> int:
    return len(catalog.BUG_IDS)


def draw(round_number: int, k: int, size: int | None = None) -> list[str]:
    """The bug ids left in round `round_number` with `k` bugs drawn from the first `size` of the catalog
    (default: all of it), sorted by catalog order."""
    ids = catalog.BUG_IDS[: catalog_size() if size is None else size]
    chosen = set(random.Random(round_number).sample(ids, k))
    return [b for b in ids if b in chosen]


@dataclass(frozen=True)
class Round:
    number: int
    bugs: int
    drawn_at: dt.datetime  # UTC
    size: int = field(default_factory=catalog_size)  # the catalog size the round was drawn from

    @property
    def drawn(self) -> list[str]:
        return draw(self.number, self.bugs, self.size)

    def header(self) -> str:
        when = self.drawn_at.strftime(TIME_FORMAT)
        return HEADER.format(round=self.number, bugs=self.bugs, s="" if self.bugs == 1 else "s", size=self.size,
                             when=when, check=header_check(self.number, self.bugs, self.size, when))


def header_check(number: int, bugs: int, size: int, when: str) -> str:
    """8 hex digits derived from the header's fields: an edited number, count, size or time no longer matches
    (a guard against editing the header by hand, not a secret)."""
    return hashlib.sha256(f"GRPO round {number}:{bugs}:{size}:{when}".encode()).hexdigest()[:8]


def parse_header(text: str) -> Round | None:
    """The Round a file's first line announces, or None for any other file (or a catalog size this
    catalog does not reach)."""
    match = HEADER_RE.match(text.split("\n", 1)[0].rstrip("\r"))
    if not match:
        return None
    bugs, size = int(match[2]), int(match[3]) if match[3] else LEGACY_SIZE
    if not 1 <= bugs <= size <= catalog_size():
        return None
    if bool(match[3]) != bool(match[5]) or (match[5] and match[5] != header_check(int(match[1]), bugs, size, match[4])):
        return None  # a size comes with its check: dropping the check is editing the header
    when = dt.datetime.strptime(match[4], TIME_FORMAT).replace(tzinfo=dt.UTC)
    return Round(int(match[1]), bugs, when, size)


def header_problem(text: str) -> str | None:
    """None for a file whose first line is an intact round header; otherwise why it cannot be graded as a
    round, in one sentence: the header was edited, or there is none."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if parse_header(text) is not None:
        return None
    if first.startswith(HEADER_START.strip()):
        return (f"its round header was edited (it does not match what `make mock` wrote: {first[:90]!r}); "
                f"a round is graded only with the header it was drawn with: restore it, or draw a new round")
    return ("not a practice round: its first line is not a round header (`make mock` writes one; a round "
            "whose header was deleted cannot be graded: restore the line)")


def round_source(number: int, bugs: int, drawn_at: dt.datetime, hard: bool = False, size: int | None = None) -> str:
    """The text of practice/round_<number>.py: header, then grpo_buggy.py with only the drawn bugs left."""
    info = Round(number, bugs, drawn_at) if size is None else Round(number, bugs, drawn_at, size)
    keep = set(info.drawn)
    body = handout_with_fixed([b.function for b in catalog.BUGS if b.id not in keep])
    if hard:
        body = first_docstring_lines(body)
    return info.header() + "\n" + body


# ----------------------------------------------------------------------------------------------
# make mock


def round_path(number: int) -> Path:
    return PRACTICE / f"round_{number}.py"


def existing_rounds() -> dict[Path, Round]:
    """Every practice/round_*.py whose header is intact."""
    found = {}
    for path in sorted(PRACTICE.glob("round_*.py")) if PRACTICE.is_dir() else []:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            info = parse_header(path.read_text())
            if info is not None:
                found[path] = info
    return found


def newest_round() -> Path:
    """The round `make grade` and `make hint` default to; CannotGrade when there is none."""
    rounds = existing_rounds()
    numbered = {p: int(m[1]) for p in PRACTICE.glob("round_*.py") if (m := re.fullmatch(r"round_(\d+)\.py", p.name))}
    newest = max(numbered, key=numbered.get, default=None)
    if newest is not None and newest not in rounds:  # its header was edited or deleted: never grade an older one
        with contextlib.suppress(OSError, UnicodeDecodeError):
            raise CannotGrade(f"{rel(newest)}: {header_problem(newest.read_text())}")
    if not rounds:
        raise CannotGrade("no practice round yet: run `make mock` first, or pass FILE=path")
    return max(rounds, key=lambda p: (rounds[p].drawn_at, rounds[p].number))


def next_round_number() -> int:
    numbers = [int(m[1]) for p in PRACTICE.glob("round_*.py") if (m := re.fullmatch(r"round_(\d+)\.py", p.name))]
    return max(numbers, default=0) + 1


def parse_bugs(value: str) -> int:
    n = catalog_size()
    if str(value).strip().lower() == "all":
        return n
    try:
        k = int(value)
    except ValueError:
        k = -1
    if not 1 <= k <= n:
        raise CannotGrade(f"BUGS must be a number from 1 to {n}, or all; got {value!r}")
    return k


def mock(number: int | None, bugs: str, hard: bool, now: dt.datetime | None = None) -> Path:
    """Write practice/round_<number>.py (never over an existing file) and say what to do next."""
    k = parse_bugs(bugs)
    if number is None:
        number = next_round_number()
    if number < 0:
        raise CannotGrade(f"ROUND must be a number >= 0, got {number}")
    path = round_path(number)
    if path.exists():
        raise CannotGrade(f"{rel(path)} exists already (it is never overwritten): grade it with "
                          f"`make grade FILE={rel(path)}`, or pick another ROUND=N")
    now = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    text = round_source(number, k, now, hard)
    PRACTICE.mkdir(exist_ok=True)
    with open(path, "x") as f:  # "x": fails rather than overwrite, even in a race
        f.write(text)
    print(f"Round {number}: {k} bug{'s' * (k != 1)} left in {rel(path)} (a copy of grpo_buggy.py"
          f"{', docstrings cut to their first sentence' if hard else ''}). The round is {ROUND_MINUTES} minutes.")
    steps = [(f".venv/bin/python {rel(path)}", "run it and read the logs"),
             (f"edit {rel(path)}", "find the bugs with tiny inputs; fix them in place"),
             ("make grade", "which bugs are fixed, and whether a fix broke something else"),
             ("make hint [LEVEL=2|3] [N=k]", "a hint for one remaining bug")]
    width = max(len(cmd) for cmd, _ in steps) + 3
    print("Next:\n" + "\n".join(f"  {cmd:<{width}}{what}" for cmd, what in steps))
    return path


def rel(path: Path) -> str:
    """The path relative to the repository when it is inside it (what `make grade FILE=` expects)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def clock(info: Round, now: dt.datetime | None = None) -> str:
    """mm:ss since the round was drawn."""
    seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - info.drawn_at).total_seconds()))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"
