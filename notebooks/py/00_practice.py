# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 — Start here: practising the round
#
# **The round.** You are handed a small GRPO trainer in PyTorch that runs without an exception and learns
# poorly. You find its silent bugs with tiny inputs and fix them without changing a public signature; you
# may be asked to write the spec's functions yourself; and the last 15 minutes are a discussion of the RL
# math behind the code you just fixed (ratio clipping, advantage normalisation, on- vs off-policy updates,
# KL vs clipping, group baseline vs critic).
#
# This workbook rehearses each part with a command, a grader and the notebooks that back the answers:
#
# 1. **Debug** a hand-out with bugs left in, against the clock: `make mock [BUGS=k]`, fix
#    `practice/round_N.py` in place, `make grade`, `make hint [LEVEL=1|2|3]`. Behind it: notebook 01 (the
#    method, then every bug on a tiny input) and notebook 03 (the assertions and logging that catch them).
# 2. **From scratch**: write the spec's three public functions (or other functions of the trainer) from
#    their docstrings: `make scratch [FUNCS=...|all]`, edit `practice/scratch_N.py`,
#    `make grade FILE=practice/scratch_N.py`. Behind it: the spec, `SPEC.md`, one graded line per sentence.
# 3. **Discussion**: answer aloud, then compare with a model answer and the notebook section that backs it:
#    `make drill`, `make drill REPORT=1`, or the card below. Behind it: notebooks 02, 04 and 05 (follow-ups
#    2, 4 and 5 of SPEC.md), 06 (the GRPO variants of TRL and verl) and 07 (off-policy data in practice).
#
# `practice/` is git-ignored: your rounds, scratch files and drill scores stay on your machine. Suggested
# order: read `grpo_buggy.py` and run it; do a mock round (part 1); write the functions from scratch
# (part 2); then drill the discussion (part 3) until every topic's mean score is close to 2. This notebook
# demonstrates parts 2 and 3 on throw-away files; nothing here writes to `practice/`.

# %%
import random
import tempfile
from pathlib import Path

from IPython.display import display

import workbook  # noqa: F401  (one torch thread)
from interview import drill, scratch, scratch_grader, spec_cases, splice

work = Path(tempfile.mkdtemp(prefix="practice_demo_"))  # a throw-away practice folder for this notebook

# %% [markdown]
# ## 1. Debug a hand-out
#
# `make mock` draws a round: `practice/round_N.py` is `grpo_buggy.py` with k of its bugs left in (3 by
# default, as in the reported interviews) and the others fixed; its header says which round it is, never
# which bugs. Run it, read the logs, find the bugs with tiny inputs (notebook 01 §1 is the method), fix
# them in place. `make grade` tells you which bugs are fixed and whether a fix broke a spec sentence or
# the training run; `make hint` gives one hint per remaining bug, from the symptom (level 1) to the fix
# (level 3). A round is meant to take 45 minutes.

# %% [markdown]
# ## 2. Write it from scratch
#
# `make scratch` writes `practice/scratch_N.py`: the same hand-out with no bug left in, where the three
# public functions of the spec (`sample_from_logits`, `group_advantage`, `grpo_loss`) are replaced by stubs
# that keep their signature and their docstring, now followed by the sentences of `SPEC.md` they are graded on.
# `FUNCS=masked_mean,kl_to_reference` stubs other functions of the trainer instead (`FUNCS=all`: every
# function the bug catalog touches). Here is one stub, from a scratch file written into the throw-away folder:

# %%
path = scratch.new_scratch(out_dir=work)
stub = splice.function_nodes(path.read_text())["grpo_loss"]
lines = path.read_text().splitlines()[stub.lineno - 1 : stub.end_lineno]
spec_part = lines[lines.index("    " + scratch.SPEC_LINE) : -1]
print(path.name)
print("\n".join([lines[0], "    ...", *spec_part, lines[-1].split("(")[0] + '("grpo_loss: write it, then ...")']))
assert scratch.is_stub(stub)

# %% [markdown]
# `make grade FILE=practice/scratch_N.py` grades it one spec sentence at a time: `pass` or `fail`, and
# for a failure the smallest input that shows it, with your value beside the expected one. A stub still
# raising `NotImplementedError` is "not written yet". Each sentence is checked with only the functions it
# is about taken from your file (the rest is the fixed twin), so one mistake fails only the sentences it
# breaks. Once nothing is left to write, your functions also train the default run, and the final reward
# is printed beside the fixed twin's.
#
# Say we write `group_advantage` and make the classic slip of the *sample* standard deviation (divide by
# G − 1), where the spec (SPEC.md, sentence S4 population-std) asks for the population one (divide by G).
# The other two functions are still stubs:

# %%
MY_GROUP_ADVANTAGE = '''
def group_advantage(rewards, eps: float = 1e-8):
    r = check_rewards(rewards, eps)  # the hand-out's validation: a nonempty list of finite reals, eps > 0
    if bool((r == r[0]).all()):  # a constant group carries no signal
        return torch.zeros_like(r)
    scale = r.abs().max()
    r = r / scale  # |r| <= 1: the mean and the variance cannot overflow
    centered = r - r.mean()
    std = centered.pow(2).sum().div(len(r) - 1).sqrt()  # sample std: divides by G - 1
    return centered / (std + eps / scale)
'''
path.write_text(scratch.splice(path.read_text(), {"group_advantage": MY_GROUP_ADVANTAGE.strip() + "\n"}))
code = scratch_grader.grade(path, train=False)
print("exit code", code)
outcomes = scratch_grader.grade_outcomes(path)
assert code == 1
assert {o.key for o in outcomes if not o.ok and not o.not_written} == {"population-std"}
assert {o.key for o in outcomes if o.not_written} == {s.key for s in spec_cases.graded_sentences()
                                                     if set(s.funcs) & {"sample_from_logits", "grpo_loss"}}

# %% [markdown]
# One sentence fails, on the smallest group that shows it: for rewards [0, 1] the population std is 0.5
# and the advantages are ±1; dividing by G − 1 gives a std of 0.7071 and advantages of ±0.7071. The
# sentences about eps, overflow and constant groups still pass, because that one line breaks none of them.
# The sentences of the two stubs say "not written yet", and there is no training run until they are written.
# Exit codes are the mock grader's: 0 when every line passes, 1 otherwise, 2 when the file cannot be graded
# (missing, a syntax error, an import error, a renamed function or a changed signature: one line says which).

# %% [markdown]
# ## 3. The discussion drill
#
# `make drill` asks one question at a time. Answer aloud while the timer runs (about 90 s, the pace of
# the interview's last 15 minutes), press Enter to see the model answer and the notebook section whose
# output backs it, then score yourself: 0 (did not know it), 1 (partly), 2 (knew it). Scores are saved
# after every answer in `practice/drill_scores.json`; `make drill REPORT=1` shows them per topic.
#
# The next question follows a Leitner schedule: each question sits in a box from 0 to 4 (0 when never
# scored); a 2 moves it up one box, a 1 leaves it, a 0 sends it back to box 0, and the draw weights a
# question by 2^−box. A question you could not answer comes back 16 times as often as one you have
# mastered. The bank (`interview/questions.toml`) comes from follow-ups 2 to 5 and the discussion topics of
# `SPEC.md`, and from the notebooks:

# %%
bank = drill.load_bank()
for topic in drill.TOPICS:
    qs = [q for q in bank if q.topic == topic]
    print(f"{topic:<26} {len(qs):2d} questions, backed by notebooks {sorted({q.notebook for q in qs})}")
print(f"{'total':<26} {len(bank):2d}")
assert len(bank) >= 30 and set(drill.TOPICS) == {q.topic for q in bank}
assert [drill.weight(b) / drill.weight(drill.MAX_BOX) for b in (0, drill.MAX_BOX)] == [16.0, 1.0]

# %% [markdown]
# The same drill as a card: **Next** draws a question, **Reveal** shows the model answer and its section,
# the score buttons record your score and draw the next question. This card keeps its scores in memory
# (they are lost with the kernel); set `SAVE_SCORES = True` to keep them in `practice/drill_scores.json`
# with the terminal drill's.

# %%
# NBVAL_IGNORE_OUTPUT
SAVE_SCORES = False
card = drill.DrillCard(bank, drill.ScoreStore(drill.SCORES_PATH if SAVE_SCORES else None), random.Random())
display(card.widget)

# %% [markdown]
# The card's buttons, clicked from Python on a card of its own (seeded draw, scores in memory), printing
# what the card shows after each click:

# %%
check = drill.DrillCard(bank, drill.ScoreStore(None), random.Random(0))


def shows(card):
    """The card's text, with the cited section as `notebook NN §K` (titles belong to the other notebooks)."""
    q = card.current
    lines = card.text().splitlines()
    backed = [i for i, line in enumerate(lines) if line.startswith("Backed by")]
    for i in backed:
        assert lines[i].startswith(f"Backed by {q.ref}")
        lines[i] = f"Backed by {q.ref}."
    return "\n".join(lines)


check.next_button.click()
first = check.current
print("after Next:\n" + shows(check), end="\n\n")
check.score_buttons[0].click()  # ignored: nothing is revealed yet
assert check.current is first and check.store.history(first.id) == []
check.reveal_button.click()
print("after Reveal:\n" + shows(check), end="\n\n")
assert check.revealed and drill.section_title(first) is not None
check.score_buttons[0].click()
print("after the 0 button:\n" + shows(check))
assert check.store.box(first.id) == 0 and [h[1] for h in check.store.history(first.id)] == [0]
assert check.current is not first and not check.revealed

# %% [markdown]
# The score went to box 0, so that question now weighs 2^0 = 1 in the draw against 2^−1 = 0.5 for a
# question scored 2 once: it comes back sooner.
#
# **Where the answers live.** Every model answer names the notebook section that backs it with an output
# you can re-run: notebook 02 §2 and §3 for the ratio and its drift, notebook 04 §1 to §5 for the four
# stabilisers, notebook 05 §1, §3 and §6 for the group baseline and its failures, notebook 06 §1 to §7 for
# the variants in TRL and verl, notebook 07 §1 to §3 for off-policy data in practice.
