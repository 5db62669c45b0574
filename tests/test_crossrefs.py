"""Every cross-reference to a notebook section (`notebook NN §K` or `§K.J`) resolves to a heading
`## K. Title` (or `### K.J Title`) of that notebook's source, wherever it is written: notebooks, README,
bench/README.md, the workbook's modules and question bank. Old-style references ("section 1.3") are
rejected: they cannot be checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "notebooks" / "py").glob("[0-9][0-9]_*.py"))
REFERENCE = re.compile(r"notebook (\d\d) §(\d+)(?:\.(\d+))?")
OLD_STYLE = re.compile(r"\bsections? \d+(\.\d+)?\b", re.IGNORECASE)


def texts():
    files = [*SOURCES, ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "workbook").glob("*.py")),
             *sorted((ROOT / "workbook").glob("*.toml"))]
    return {path: path.read_text() for path in files if path.exists()}


def headings(number: str) -> set[str]:
    """{'3', '3.2', ...} of notebook `number`'s source; empty if there is no such notebook."""
    found = set()
    for path in SOURCES:
        if path.name.startswith(number + "_"):
            for line in path.read_text().splitlines():
                if m := re.match(r"# #{2,3} (\d+)(?:\.(\d+))?[. ]", line):
                    found.add(m.group(1) + (f".{m.group(2)}" if m.group(2) else ""))
    return found


def unresolved(text: str) -> list[str]:
    bad = []
    for m in REFERENCE.finditer(text):
        number, section, sub = m.groups()
        if (section + (f".{sub}" if sub else "")) not in headings(number):
            bad.append(m.group(0))
    return bad


@pytest.mark.parametrize("path", list(texts()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_section_reference_resolves(path):
    text = texts()[path]
    assert not unresolved(text), f"{path.name}: {unresolved(text)}"
    assert not OLD_STYLE.findall(text) or not path.name[:2].isdigit(), \
        f"{path.name}: write references as 'notebook NN §K', not {OLD_STYLE.search(text).group(0)!r}"


def test_the_checker_can_fail():
    assert unresolved("see notebook 02 §99") == ["notebook 02 §99"]
    assert unresolved("see notebook 42 §1") == ["notebook 42 §1"]
    assert headings("02"), "notebook 02 has numbered sections"
