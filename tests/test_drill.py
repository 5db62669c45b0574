"""The discussion drill (interview/drill.py, bank interview/questions.toml; its command line is interview/cli.py).

  - the bank: at least 30 questions over the issue's topics, each with a model answer, and every cited
    section exists as a `## K.` heading of notebooks/py/NN_*.py (06 and 07 included: those tests fail
    until the notebooks land);
  - the Leitner schedule: box moves, draw weights, and the draw itself with a fixed seed;
  - the terminal loop on injected streams: scores saved, EOF and Ctrl-C end it cleanly;
  - the card widget: its buttons clicked from Python.
Scores go to tmp_path or memory only: nothing touches practice/.
"""

from __future__ import annotations

import io
import json
import math
import random
from collections import Counter

import pytest

from interview import cli, drill

BANK = drill.load_bank()
ISSUE_TOPICS = {"ratio clipping", "advantage normalisation", "on/off-policy", "KL vs clipping",
                "group baseline vs critic", "stabilisers", "variants"}


# ----------------------------------------------------------------------------------------------
# The bank


def test_bank_size_and_topics():
    assert len(BANK) >= 30
    counts = Counter(q.topic for q in BANK)
    assert ISSUE_TOPICS <= set(counts), ISSUE_TOPICS - set(counts)
    assert all(counts[t] >= 3 for t in drill.TOPICS), counts
    assert {q.notebook for q in BANK if q.topic == "variants"} == {6, 7}


def test_every_question_has_a_model_answer_of_a_few_sentences():
    for q in BANK:
        sentences = [s for s in q.answer.replace("e.g.", "eg").split(". ") if s.strip()]
        assert 2 <= len(sentences) <= 8 and 150 <= len(q.answer) <= 900, (q.id, len(sentences), len(q.answer))
        assert len(q.question) >= 20 and q.question.rstrip()[-1] in "?.", q.id


@pytest.mark.parametrize("notebook", sorted({q.notebook for q in BANK}), ids=lambda n: f"{n:02d}")
def test_every_cited_section_exists(notebook):
    """Resolves (notebook, section) against the `## K. Title` headings of notebooks/py/NN_*.py."""
    source = drill.notebook_source(notebook)
    assert source is not None, f"notebooks/py/{notebook:02d}_*.py does not exist (yet)"
    titles = drill.section_titles(source)
    missing = sorted({(q.id, q.section) for q in BANK if q.notebook == notebook and q.section not in titles})
    assert not missing, f"{source.name} has no `## K.` heading for {missing}; it has {sorted(titles)}"


def test_section_resolution_on_a_synthetic_source(tmp_path):
    (tmp_path / "09_demo.py").write_text(
        "# %% [markdown]\n# # 09 - Demo\n#\n# ## 1. First\n\n# %%\nx = 1\n\n# %% [markdown]\n"
        "# ### 1.1 Sub\n# ## 2. Second part  \n# ## Self-check\n")
    source = drill.notebook_source(9, tmp_path)
    assert source.name == "09_demo.py"
    assert drill.section_titles(source) == {1: "First", 2: "Second part"}
    q = drill.Question("x", "debugging", "?", "a", 9, 2)
    assert drill.section_title(q, tmp_path) == "Second part"
    assert drill.section_title(drill.Question("x", "debugging", "?", "a", 9, 3), tmp_path) is None
    assert drill.notebook_source(8, tmp_path) is None


@pytest.mark.parametrize("broken, says", [
    ('id = "a"\ntopic = "debugging"\nquestion = "q?"\nanswer = "a"\nnotebook = 1\n', "section must be a int"),
    ('id = "a"\ntopic = "nope"\nquestion = "q?"\nanswer = "a"\nnotebook = 1\nsection = 1\n', "topic 'nope'"),
    ('id = "a"\ntopic = "debugging"\nquestion = "q?"\nanswer = "a"\nnotebook = 1\nsection = 1\nextra = 1\n',
     "unknown field 'extra'"),
])
def test_a_broken_bank_is_refused_with_one_clear_line(tmp_path, broken, says):
    path = tmp_path / "bank.toml"
    path.write_text("[[question]]\n" + broken)
    with pytest.raises(drill.DrillError, match=says):
        drill.load_bank(path)


def test_duplicate_ids_are_refused(tmp_path):
    entry = '[[question]]\nid = "a"\ntopic = "debugging"\nquestion = "q?"\nanswer = "a"\nnotebook = 1\nsection = 1\n'
    path = tmp_path / "bank.toml"
    path.write_text(entry + entry)
    with pytest.raises(drill.DrillError, match="used twice"):
        drill.load_bank(path)


# ----------------------------------------------------------------------------------------------
# Leitner schedule


@pytest.mark.parametrize("box, score, expected", [
    (0, 2, 1), (3, 2, 4), (drill.MAX_BOX, 2, drill.MAX_BOX),  # knew it: up one box, at most MAX_BOX
    (0, 1, 0), (3, 1, 3),  # partly: stay
    (0, 0, 0), (3, 0, 0), (drill.MAX_BOX, 0, 0),  # did not know it: back to box 0
])
def test_box_moves(box, score, expected):
    assert drill.next_box(box, score) == expected


def test_store_moves_boxes_and_keeps_the_history():
    store = drill.ScoreStore(None)
    assert [store.record("q", s) for s in (2, 2, 1, 2, 0, 2)] == [1, 2, 2, 3, 0, 1]
    assert [h[1] for h in store.history("q")] == [2, 2, 1, 2, 0, 2]
    with pytest.raises(ValueError):
        store.record("q", 3)


def test_draw_is_deterministic_for_a_seed_and_never_repeats():
    store = drill.ScoreStore(None)

    def sequence(seed, n=50):
        rng, previous, out = random.Random(seed), None, []
        for _ in range(n):
            previous = drill.draw(BANK, store, rng, previous).id
            out.append(previous)
        return out

    a, b = sequence(7), sequence(7)
    assert a == b
    assert a != sequence(8)
    assert all(x != y for x, y in zip(a, a[1:], strict=False))


def test_draw_favours_the_lowest_boxes_with_a_fixed_seed():
    """Three questions in boxes 0, 1 and 4 (the rest of the bank mastered): draw frequencies follow 2^-box."""
    store = drill.ScoreStore(None)
    for q in BANK:
        store.data["questions"][q.id] = {"box": drill.MAX_BOX, "history": []}
    low, mid = BANK[0].id, BANK[1].id
    store.data["questions"][low]["box"], store.data["questions"][mid]["box"] = 0, 1
    rng, n = random.Random(0), 20000
    counts = Counter(drill.draw(BANK, store, rng).id for _ in range(n))
    total = sum(drill.weight(store.box(q.id)) for q in BANK)
    for qid, box in ((low, 0), (mid, 1), (BANK[2].id, drill.MAX_BOX)):
        p = drill.weight(box) / total
        assert abs(counts[qid] / n - p) <= 5 * math.sqrt(p * (1 - p) / n), (qid, counts[qid] / n, p)
    assert counts[low] > counts[mid] > counts[BANK[2].id]


def test_scoring_a_question_low_brings_it_back_sooner():
    """After one pass where everything else was known, the question scored 0 is the most likely next one."""
    store = drill.ScoreStore(None)
    for q in BANK:
        store.record(q.id, 2)
    store.record(BANK[5].id, 0)
    weights = {q.id: drill.weight(store.box(q.id)) for q in BANK}
    assert max(weights, key=weights.get) == BANK[5].id and weights[BANK[5].id] == 2 * weights[BANK[6].id]


# ----------------------------------------------------------------------------------------------
# Scores file


def test_scores_round_trip_through_the_file(tmp_path):
    path = tmp_path / "practice" / "drill_scores.json"
    store = drill.ScoreStore(path)
    store.record(BANK[0].id, 2, seconds=12.34)
    again = drill.ScoreStore(path)
    assert again.box(BANK[0].id) == 1
    assert again.history(BANK[0].id)[0][1:] == [2, 12.3]
    assert json.loads(path.read_text())["version"] == 1


def test_memory_store_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = drill.ScoreStore(None)
    store.record(BANK[0].id, 1)
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_scores_file_is_one_clear_line(tmp_path, capsys):
    path = tmp_path / "drill_scores.json"
    path.write_text("{not json")
    with pytest.raises(drill.DrillError, match="not a drill scores file"):
        drill.ScoreStore(path)
    assert cli.main(["drill", "--scores", str(path), "--report"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not a drill scores file" in err[0]


# ----------------------------------------------------------------------------------------------
# The terminal loop


class Clock:
    """A fake monotonic clock: each call advances by the next step."""

    def __init__(self, *steps):
        self.t, self.steps = 0.0, list(steps)

    def __call__(self):
        self.t += self.steps.pop(0) if self.steps else 0.0
        return self.t


def run(stdin_text, store=None, seed=0, clock=None, **kw):
    store = store or drill.ScoreStore(None)
    out = io.StringIO()
    scored = drill.run(BANK, store, random.Random(seed), stdin=io.StringIO(stdin_text), stdout=out,
                       clock=clock or Clock(), **kw)
    return scored, store, out.getvalue()


def test_terminal_round_trip_saves_scores():
    # question 1: Enter reveals, score 2; question 2: Enter, a typo, then 0; question 3: Enter, skip; then q
    scored, store, text = run("\n2\n\nx\n0\n\n\nq\n")
    assert scored == 2
    asked = [line.split("|")[-1].strip(" ]") for line in text.splitlines() if line.startswith("[")]
    assert len(asked) == 4 and len(set(asked[:3])) == 3
    assert [store.box(asked[0]), store.box(asked[1])] == [1, 0]
    assert store.history(asked[2]) == []  # skipped
    assert "please type 0, 1 or 2" in text
    assert text.count("Backed by notebook") == 3
    assert text.rstrip().endswith("`make drill REPORT=1` shows your scores.")


def test_reveal_shows_the_answer_and_the_resolved_section():
    _, _, text = run("\n\nq\n", seed=3)
    q = next(q for q in BANK if f"| {q.id}]" in text)
    assert " ".join(q.answer.split())[:60] in " ".join(text.split())
    title = drill.section_title(q)
    assert f"Backed by {q.ref} ({title})." in text if title else f"Backed by {q.ref}." in text


def test_timer_reports_the_time_taken_and_the_budget():
    _, _, text = run("\n\nq\n", clock=Clock(0.0, 120.0), budget=90)
    assert "  120 s, over the 90 s budget" in text
    _, _, text = run("\n\nq\n", clock=Clock(0.0, 42.0), budget=90)
    assert "  42 s\n" in text


@pytest.mark.parametrize("stdin_text", ["", "\n", "\n2\n", "\n2\n\n"])
def test_end_of_input_stops_cleanly(stdin_text):
    scored, store, text = run(stdin_text)
    assert scored == stdin_text.count("2")
    assert "Stopped:" in text.splitlines()[-1]


def test_ctrl_c_stops_cleanly_and_keeps_what_was_scored(tmp_path):
    class Interrupting(io.StringIO):
        def readline(self, *args):
            line = super().readline(*args)
            if line == "":
                raise KeyboardInterrupt
            return line

    path = tmp_path / "scores.json"
    store, out = drill.ScoreStore(path), io.StringIO()
    scored = drill.run(BANK, store, random.Random(0), stdin=Interrupting("\n1\n\n"), stdout=out, clock=Clock())
    assert scored == 1
    assert "Stopped: 1 answer scored" in out.getvalue()
    assert sum(len(drill.ScoreStore(path).history(q.id)) for q in BANK) == 1


def test_report_per_topic(tmp_path):
    path = tmp_path / "scores.json"
    store = drill.ScoreStore(path)
    clipping = [q for q in BANK if q.topic == "ratio clipping"]
    store.record(clipping[0].id, 2)
    store.record(clipping[1].id, 1)
    out = io.StringIO()
    assert cli.main(["drill", "--report", "--scores", str(path)], stdout=out) == 0
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if line.startswith("ratio clipping"))
    n = len(clipping)
    assert row.split()[2:5] == [str(n), "2", "1.50"]
    assert row.split()[-5:] == [str(n - 1), "1", "0", "0", "0"]
    assert {line.split("  ")[0] for line in lines[1:-1]} == set(drill.TOPICS)
    assert lines[-1].startswith("weakest: ")


def test_main_runs_the_drill_on_given_streams(tmp_path):
    path = tmp_path / "scores.json"
    out = io.StringIO()
    assert cli.main(["drill", "--seed", "1", "--scores", str(path)], stdin=io.StringIO("\n2\nq\n"), stdout=out) == 0
    assert sum(len(drill.ScoreStore(path).history(q.id)) for q in BANK) == 1


# ----------------------------------------------------------------------------------------------
# The card widget


def test_card_buttons_clicked_from_python():
    store = drill.ScoreStore(None)
    card = drill.DrillCard(BANK, store, random.Random(0))
    assert card.reveal_button.disabled and all(b.disabled for b in card.score_buttons.values())
    assert card.text() == f"{len(BANK)} questions. Press Next."

    card.next_button.click()
    first = card.current
    assert card.text().splitlines()[1] == " ".join(first.question.split())
    assert "Answer:" not in card.text() and first.answer.split()[0] not in card.view.value.split("<b>")[0]
    card.score_buttons[2].click()  # scoring before the reveal does nothing
    assert store.history(first.id) == [] and card.current is first

    card.reveal_button.click()
    assert card.text().splitlines()[2] == "Answer: " + " ".join(first.answer.split())
    assert f"Backed by {first.ref}" in card.text() and "Backed by" in card.view.value
    assert card.reveal_button.disabled and not any(b.disabled for b in card.score_buttons.values())

    card.score_buttons[2].click()
    assert store.box(first.id) == 1
    assert card.current is not first and not card.revealed
    assert card.text().splitlines()[-1].startswith(f"Saved 2 for {first.id} (now box 1).")


def test_card_draw_is_seeded():
    def first_three(seed):
        card = drill.DrillCard(BANK, drill.ScoreStore(None), random.Random(seed))
        ids = []
        for _ in range(3):
            card.next_button.click()
            ids.append(card.current.id)
        return ids

    assert first_three(0) == first_three(0)
