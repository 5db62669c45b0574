"""The repository stands on its own: no tracked file names the documents the round was first described in
(by their numbers), the folder of team documents beside the checkout, or any path outside the repository.
The round is stated in SPEC.md, in our own words; an RNG seed (`--seed 0`) is of course fine. The examples
below are assembled from pieces so that this file passes its own check."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "a source document of the round": re.compile(r"\bseeds? 0\d\d\b", re.IGNORECASE),
    "a folder beside the checkout": re.compile(r"(?<![\w.-])" + "sha" + "red/"),
    "an absolute path on a developer's machine": re.compile(r"(?<![\w.])/(?:work|root|home|Users)/[\w.]"),
}
PARENT_PATH = re.compile(r"(?<![\w.])((?:\.\./)+)[\w.-]")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [ROOT / name for name in names.splitlines()]
    return [p for p in paths if p.is_file() and b"\0" not in p.read_bytes()[:4096]]


def mentions(path: Path, text: str) -> list[str]:
    """What `text` (the contents of `path`) names that lies outside the repository."""
    found = [f"{what}: {m.group(0)!r}" for what, pattern in FORBIDDEN.items() for m in pattern.finditer(text)]
    for m in PARENT_PATH.finditer(text):
        target = (path.parent / m.group(1)).resolve()
        if target != ROOT and ROOT not in target.parents:
            found.append(f"a path that leaves the repository: {m.group(0)!r}")
    return found


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_text_files()
    assert len(files) > 20, "git ls-files found too few files: is this a checkout?"
    problems = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in mentions(p, p.read_text(errors="replace"))]
    assert not problems, "\n".join(problems[:40])


SEED, SHARED = "seed" + " 0", "sha" + "red/"
OUTSIDE = "/" + "work/main/grpo_fixed.py", "/" + "root/.cache/x", "../" + "../elsewhere/file.txt"


@pytest.mark.parametrize("text", [
    f"the spec, {SEED}00 in the notes", f"{SEED.title()}01 and 004".replace("Seed", "Seeds"), f"see ../{SHARED}seeds",
    f"open {SHARED}REVIEW.md", *OUTSIDE,
])
def test_the_check_catches_each_kind_of_mention(text):
    assert mentions(ROOT / "tests" / "example.md", text)


@pytest.mark.parametrize("text", [
    "--seed 0", "seed=0", "for seed in (0, 1, 2)", "SPEC.md, sentence eps", "the RNG seed 7",
    "../grpo_fixed.py", "../notebooks/py/01_find_the_bugs.py", "workbook/shared_state", "/tmp/ipykernel_1/2.py",
])
def test_the_check_allows_what_is_inside(text):
    assert not mentions(ROOT / "tests" / "example.md", text)
