"""The spec's sentences by key, read from SPEC.md: the one table everything that checks the spec reads.

SPEC.md's "Required behaviour" lists each sentence as

    - **S5 `eps`** (`group_advantage`): For each prompt's group, ...
      (continuation lines indented by two spaces)

that is its number, its stable key, the public functions it is about, and its text. Its "Follow-ups" are a
numbered list `N. **Title.** text`. The scratch stubs' docstrings, the scratch grader, the regression lines
of `make grade` and tests/test_spec.py (its `@pytest.mark.spec(key, ...)` markers) all read SENTENCES.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbook import catalog

SPEC_PATH = catalog.ROOT / "SPEC.md"
SENTENCE = re.compile(r"^- \*\*S(\d+) `([\w-]+)`\*\* \(((?:`\w+`(?:, )?)+)\): (.*)$")
FOLLOW_UP = re.compile(r"^(\d+)\. \*\*(.+?)\*\* (.*)$")


@dataclass(frozen=True)
class Sentence:
    number: int
    key: str
    funcs: tuple[str, ...]
    text: str

    @property
    def label(self) -> str:
        """`S5 eps`"""
        return f"S{self.number} {self.key}"

    @property
    def ref(self) -> str:
        """How learner-facing text cites it: `the spec (SPEC.md, sentence S5 eps)`."""
        return f"the spec (SPEC.md, sentence {self.label})"


def _items(text: str, heading: str, start: re.Pattern) -> list[re.Match]:
    """The list items under `## heading` that match `start`, each with its indented continuation lines
    joined onto its last group."""
    items, current, inside = [], None, False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == heading
            continue
        if not inside:
            continue
        if start.match(line):
            current = [line]
            items.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return [start.match(" ".join(lines)) for lines in items]


def parse_sentences(text: str) -> dict[str, Sentence]:
    """key -> Sentence, in SPEC.md's order; ValueError if the numbers are not 1, 2, 3, ... or a key repeats."""
    table = {}
    for match in _items(text, "Required behaviour", SENTENCE):
        key = match[2]
        if key in table:
            raise ValueError(f"SPEC.md: sentence key {key!r} is used twice")
        table[key] = Sentence(int(match[1]), key, tuple(re.findall(r"`(\w+)`", match[3])), match[4].strip())
    if [s.number for s in table.values()] != list(range(1, len(table) + 1)):
        raise ValueError(f"SPEC.md: sentences are not numbered S1..S{len(table)} in order")
    return table


def parse_follow_ups(text: str) -> dict[int, str]:
    """N -> the follow-up's title (`The ratio`), from SPEC.md's numbered "Follow-ups" list."""
    return {int(m[1]): m[2].rstrip(".") for m in _items(text, "Follow-ups", FOLLOW_UP)}


_TEXT = SPEC_PATH.read_text()
SENTENCES: dict[str, Sentence] = parse_sentences(_TEXT)
FOLLOW_UPS: dict[int, str] = parse_follow_ups(_TEXT)


def sentence(key: str) -> Sentence:
    """The sentence with `key`; KeyError naming the known keys otherwise."""
    try:
        return SENTENCES[key]
    except KeyError:
        raise KeyError(f"no spec sentence {key!r} in SPEC.md; known: {list(SENTENCES)}") from None

