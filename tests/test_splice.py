"""HARD=1 (interview/splice.py `first_docstring_lines`): each docstring keeps its first whole sentence(s),
as whole lines; never part of a line, never part of a sentence."""

from __future__ import annotations

import ast
import datetime as dt

from interview import rounds, splice

SOURCE = '''\
"""Module: one sentence
over two lines. Then more
text here.

A second paragraph."""


def a():
    """One line, one sentence.
    More detail here."""
    return 1


def b():
    """
    Starts on the next line (a formula: x = 1),
    ends here. Rest.
    Even more."""
    return 2


def c():
    """A summary with no full stop

    and a second paragraph."""
    return 3


def d():
    """No sentence ends on any line
    at all"""
    return 4


def e():
    """One line only."""
    return 5
'''


def docstrings(text: str) -> dict[str, str]:
    return {getattr(n, "name", "<module>"): ast.get_docstring(n, clean=False) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.Module, ast.FunctionDef)) and ast.get_docstring(n) is not None}


def without_docstrings(text: str) -> list[str]:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef)) and node.body and splice.is_string(node.body[0]):
            node.body = node.body[1:] or [ast.Pass()]
    return [ast.dump(n) for n in tree.body]


def test_whole_sentences_as_whole_lines():
    hard = splice.first_docstring_lines(SOURCE)
    assert docstrings(hard) == {
        "<module>": "Module: one sentence\nover two lines. Then more\ntext here.",  # a sentence ends mid-line 2
        "a": "One line, one sentence.",
        "b": "\n    Starts on the next line (a formula: x = 1),\n    ends here. Rest.",
        "c": "A summary with no full stop",  # the first paragraph
        "d": "No sentence ends on any line\n    at all",  # nothing to cut at: whole
        "e": "One line only.",
    }
    assert without_docstrings(hard) == without_docstrings(SOURCE)  # only docstrings change


def test_the_first_line_alone_would_cut_a_sentence():
    """The case the old first-line rule got wrong: grpo_loss's sentence goes on to its formula."""
    easy = rounds.round_source(5, 3, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    hard = splice.first_docstring_lines(easy)
    compile(hard, "<hard>", "exec")
    loss = docstrings(hard)["grpo_loss"]
    assert loss.rstrip().endswith("over unmasked tokens t.") and "rho_t = exp(logp_t - logp_old_t)," in loss
    assert "logprobs, old_logprobs, mask: (N, T)" not in loss  # the next sentence is dropped
    for name, doc in docstrings(hard).items():
        full = docstrings(easy)[name]
        assert full.startswith(doc), name
        assert doc == full or splice.SENTENCE_END.search(doc.rstrip()) or full[len(doc):].startswith("\n\n"), name


def test_first_sentence_lines():
    assert splice.first_sentence_lines(["Done.", "more"]) == 1
    assert splice.first_sentence_lines(["Goes on", "to here.", "more"]) == 2
    assert splice.first_sentence_lines(["", "Text.", "more"]) == 2
    assert splice.first_sentence_lines(["A title", "", "Text."]) == 1
    assert splice.first_sentence_lines(["Ends (quoted).\"", "more"]) == 1
    assert splice.first_sentence_lines(["never", "ends"]) == 2
