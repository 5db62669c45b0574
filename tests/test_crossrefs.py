"""Every cross-reference to a notebook section (`notebook NN §K`, `§K.J`, or a range `§K-§L`, each section of a
range checked) resolves to a heading `## K. Title` (or `### K.J Title`) of that notebook's source, and that
heading still has the title recorded for it in notebooks/sections.toml. A section inserted or moved renumbers
the ones after it; the title check turns that into a failure instead of a reference that silently points at
the wrong section. References are checked wherever they are written: notebooks, READMEs, SPEC.md, the
workbook and interview packages and the drill bank (whose `notebook`/`section` fields count as references).
Old-style references ("section 1.3") are rejected in notebooks: they cannot be checked.

After renaming or renumbering a section on purpose, print the table to paste with
`python tests/test_crossrefs.py`."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "notebooks" / "py").glob("[0-9][0-9]_*.py"))
TABLE = ROOT / "notebooks" / "sections.toml"
REFERENCE = re.compile(r"notebook (\d\d) §(\d+(?:\.\d+)?)(?:\s*[-–]\s*§?(\d+(?:\.\d+)?))?")
HEADING = re.compile(r"^# #{2,3} (\d+(?:\.\d+)?)\.? (.+?)\s*$")
OLD_STYLE = re.compile(r"\bsections? \d+(\.\d+)?\b", re.IGNORECASE)


def texts() -> dict[Path, str]:
    files = [*SOURCES, ROOT / "README.md", ROOT / "SPEC.md", ROOT / "bench" / "README.md"]
    for package in ("workbook", "interview"):
        files += sorted((ROOT / package).glob("*.py")) + sorted((ROOT / package).glob("*.toml"))
    return {path: path.read_text() for path in files if path.exists()}


def headings(number: str) -> dict[str, str]:
    """{'3': 'Title', '3.2': 'Title', ...} of notebook `number`'s source; empty if there is no such notebook."""
    found = {}
    for path in SOURCES:
        if path.name.startswith(number + "_"):
            for line in path.read_text().splitlines():
                if m := HEADING.match(line):
                    found[m.group(1)] = m.group(2)
    return found


def expand(first: str, last: str | None) -> list[str]:
    """The sections a reference names: one, or every top-level section from `first` to `last` in full."""
    if last is None:
        return [first]
    lo, hi = int(first.split(".")[0]), int(last.split(".")[0])
    inner = [str(k) for k in range(lo + 1, hi)]
    return [first, *inner, last] if hi > lo else [first, last]


def references(text: str) -> list[tuple[str, str]]:
    """(notebook, section) for every section `text` refers to, ranges expanded; drill-bank fields included."""
    found = [(nb, s) for m in REFERENCE.finditer(text) for nb, s in [(m.group(1), x) for x in expand(*m.group(2, 3))]]
    if text.lstrip().startswith("#") and "[[question]]" in text:
        for q in tomllib.loads(text).get("question", []):
            if "notebook" in q and "section" in q:
                found.append((f"{q['notebook']:02d}", str(q["section"])))
    return found


def recorded_titles() -> dict[tuple[str, str], str]:
    table = tomllib.loads(TABLE.read_text())
    return {(nb, section): title for nb, sections in table.items() for section, title in sections.items()}


def problems(text: str, table: dict[tuple[str, str], str]) -> list[str]:
    bad = []
    for nb, section in references(text):
        title = headings(nb).get(section)
        if title is None:
            bad.append(f"notebook {nb} §{section}: no such heading")
        elif (nb, section) not in table:
            bad.append(f"notebook {nb} §{section}: not in {TABLE.name} (its title now: {title!r})")
        elif table[nb, section] != title:
            bad.append(f"notebook {nb} §{section} is now {title!r}, recorded as {table[nb, section]!r}: renumbered?")
    return bad


@pytest.mark.parametrize("path", list(texts()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_section_reference_resolves_to_its_recorded_title(path):
    text = texts()[path]
    assert not problems(text, recorded_titles()), f"{path.name}: {problems(text, recorded_titles())}"
    assert not OLD_STYLE.findall(text) or not path.name[:2].isdigit(), \
        f"{path.name}: write references as 'notebook NN §K', not {OLD_STYLE.search(text).group(0)!r}"


def test_every_recorded_section_is_still_referenced():
    used = {ref for text in texts().values() for ref in references(text)}
    stale = sorted(set(recorded_titles()) - used)
    assert not stale, f"{TABLE.name} records sections nothing refers to: {stale}"


def test_the_checker_can_fail():
    table = recorded_titles()
    assert problems("see notebook 02 §99", table) == ["notebook 02 §99: no such heading"]
    assert problems("see notebook 42 §1", table) == ["notebook 42 §1: no such heading"]
    (nb, section), title = next(iter(table.items()))
    assert problems(f"notebook {nb} §{section}", {**table, (nb, section): title + " (old)"}), "a renamed section"
    assert problems(f"notebook {nb} §{section}", {}), "a section missing from the table"


def test_a_range_names_every_section_in_it():
    assert references("notebook 04 §2-§4") == [("04", "2"), ("04", "3"), ("04", "4")]
    assert references("notebook 04 §1.2–§3") == [("04", "1.2"), ("04", "2"), ("04", "3")]
    assert references("notebook 01 §10.1") == [("01", "10.1")]


def current_table() -> str:
    """The table that records today's title of every referenced section, as TOML."""
    used = sorted({ref for text in texts().values() for ref in references(text)},
                  key=lambda r: (r[0], [int(x) for x in r[1].split(".")]))
    lines = [line for line in TABLE.read_text().splitlines() if line.startswith("#")] if TABLE.exists() else []
    current = None
    for nb, section in used:
        if nb != current:
            lines += ["", f'["{nb}"]']
            current = nb
        title = headings(nb).get(section, "MISSING")
        lines.append(f'"{section}" = {json_string(title)}')
    return "\n".join(lines) + "\n"


def json_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


if __name__ == "__main__":
    sys.stdout.write(current_table())
