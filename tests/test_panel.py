"""The practice panel of notebook 00 (interview/panel.py): its buttons run the make targets' commands."""

from __future__ import annotations

import pytest

from interview import panel, rounds


@pytest.fixture
def practice(tmp_path, monkeypatch):
    monkeypatch.setattr(rounds, "PRACTICE", tmp_path / "practice")
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def test_grade_before_any_round_says_what_to_do(practice):
    p = panel.PracticePanel(practice / "notebooks")
    assert p.grade() == 2 and "run `make mock` first" in p.text() and p.link() is None
    assert p.text().startswith("Graded: cannot grade.")
    assert not (practice / "practice").exists()


def test_draw_grade_hint_act_on_the_round_drawn(practice):
    p = panel.PracticePanel(practice / "notebooks")
    p.bugs.value, p.hard.value = "2", True
    p.draw_button.click()
    assert p.code == 0 and p.round_file == (practice / "practice" / "round_1.py").resolve()
    info = rounds.parse_header(p.round_file.read_text())
    assert (info.number, info.bugs) == (1, 2) and "docstrings cut" in p.text()
    assert p.link().endswith("](../practice/round_1.py)")  # relative to the notebook: opens in the Lab's editor
    rounds.mock(None, "3", hard=False)  # a newer round: the panel still acts on its own
    p.grade_button.click()
    assert p.code == 1 and "0 of 2 fixed" in p.text() and p.text().startswith("Graded: not yet.")
    p.level.value = "3"
    p.hint_button.click()
    assert p.code == 0 and p.text().count("(level 3)") == 1 and "hint 1 of 2 (level 3)" in p.text()
    p.which.value = 2
    p.hint_button.click()
    assert p.code == 0 and p.text().count("(level 3)") == 1 and "hint 2 of 2 (level 3)" in p.text()
    markdown = [o for o in p.output.outputs if o["output_type"] == "display_data"]
    assert markdown[0]["data"]["text/markdown"] == p.link()


def test_the_buttons_are_disabled_while_a_command_runs(practice, monkeypatch):
    p = panel.PracticePanel(practice / "notebooks")
    seen = []
    monkeypatch.setattr(panel.cli, "main", lambda argv: seen.append([b.disabled for b in (
        p.draw_button, p.grade_button, p.hint_button)]) or 0)
    p.hint()
    assert seen == [[True, True, True]] and not p.hint_button.disabled


def test_a_bad_choice_is_refused_with_the_commands_message(practice):
    p = panel.PracticePanel(practice / "notebooks")
    assert panel.bug_choices()[-1] == "all" and str(rounds.DEFAULT_BUGS) == p.bugs.value
    code, printed = panel.run_command(["mock", "--bugs", "0"])
    assert code == 2 and "BUGS must be a number" in printed
